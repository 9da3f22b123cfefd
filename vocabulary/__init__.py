"""gpuscope's shared words: what every layer (store, ingest, analysis, the faces) must spell and
say the same way: the error kinds and their exit codes (:mod:`.errors`), the secret mask every
message goes through (:mod:`.redact`).

The bottom layer: it imports nothing of gpuscope, and everything may import it.
"""
