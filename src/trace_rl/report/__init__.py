"""`report.html` for a run (`html.write_html_report`), its figures (`plots.py`), and the schemas of the route and
evaluate files it reads (`schemas.py`)."""

from trace_rl.report.html import render_report, write_html_report

__all__ = ["render_report", "write_html_report"]
