"""Layer 6, running: executing studies, the command line, the summary pages and the report.

    execution  the study driver: plan, executors (local, process pool, Ray), stored cells, notebooks
    cli        the papermill batch runner (python -m headprune_utils.run)
    summary    the cross-study summary pages (python -m headprune_utils.run.summary)
    report     the static HTML report (python -m headprune_utils.run.report)

May import: every lower layer.
"""
