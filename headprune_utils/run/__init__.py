"""Layer 6, running: executing studies, the command line, the summary pages and the report.

    execution  the study driver: plan, executors (local, process pool, Ray), stored cells, notebooks
    cli        the batch runner's command line (python -m headprune_utils.run): arguments, one call per mode
    profiles   a profile's studies validated and planned, their stored cells counted (--plan, --plan-slices)
    preflight  the checks before heavy work (outputs writable, stale results, task data readable)
    pipeline   one run of a profile end to end: cells on an executor, notebooks, summary, report
    schedule   executing several notebooks, one by one or side by side (--jobs)
    notebooks  executing one study's notebook with papermill, its outputs swapped in only on success
    summary    the cross-study summary pages (python -m headprune_utils.run.summary)
    report     the static HTML report (python -m headprune_utils.run.report)

May import: every lower layer.
"""
