"""``python -m lakecurate`` is the ``lakecurate`` command."""

from lakecurate.cli import main

main()
