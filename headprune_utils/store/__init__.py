"""Layer 0, storage: where outputs live and how results are kept (atomic, resumable, fingerprinted).

    paths    every output path (StudyPaths), the project root, the params folder
    results  result cells (atomic writes, fingerprints, run metadata)
    caches   the build-once rule of the shared caches

May import: nothing else of headprune_utils.
"""
