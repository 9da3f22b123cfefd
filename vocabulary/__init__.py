"""gpuscope's shared words: what every layer (store, ingest, analysis, the faces) must spell and
say the same way: the error kinds and their exit codes (:mod:`.errors`), the idle causes
(:mod:`.causes`), the NVML fields (:mod:`.nvml_fields`), the fix ids and texts (:mod:`.fixes`),
and the secret mask every message goes through (:mod:`.redact`).

The bottom layer: it imports nothing of gpuscope, and everything may import it.
"""
