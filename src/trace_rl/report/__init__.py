"""`report.html` for a run (`html.write_html_report`), its figures (`plots.py`), reading only
`trace_rl.artifacts` (the route and evaluate schemas are `artifacts/router.py` and `artifacts/evaluation.py`)."""

from trace_rl.report.html import render_report, write_html_report

__all__ = ["render_report", "write_html_report"]
