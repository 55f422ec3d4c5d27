"""Layer 0, storage: where outputs live and how results are kept (atomic, resumable, fingerprinted).

    paths    every output path (StudyPaths), the project root, the params folder
    results  result cells (atomic writes, fingerprints, checks on read, run metadata)
    hashes   the manifest file of a cells folder (SHA-256 of every cell)
    manifest what the manifest is for; the command that records and verifies it
    caches   the build-once rule of the shared caches

May import: nothing else of headprune_utils.
"""
