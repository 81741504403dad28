"""Near-duplicate signatures: pure numpy MinHash (``minhash``) and the Arrow columns of a chunk
(``signatures``); the lake-wide band index they are matched against is ``store.band_index``."""
