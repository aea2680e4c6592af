"""What a person reads: a run's progress, round table, summary and plots rendered as plain data and
text, and the experiments' statistics, tables and resume records. Pure Python (matplotlib for
plots); publishing them is flows/'s job.
"""
