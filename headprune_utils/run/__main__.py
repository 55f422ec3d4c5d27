"""``python -m headprune_utils.run``: the batch runner (:mod:`headprune_utils.run.cli`)."""
from headprune_utils.run.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
