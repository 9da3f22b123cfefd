"""DuckDB store -> plain data (DataFrames, dataclasses): steps, busy time, idle gaps and their
causes, recommendations, run comparison. No UI imports here (no streamlit, no plotly).

Entry points: :func:`gpuscope.analysis.report.analyze_run` and
:func:`gpuscope.analysis.compare.compare_runs`.
"""
