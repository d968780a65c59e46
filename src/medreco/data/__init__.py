"""Data: the synthetic cohort, and (with the report-mining issue) ontology, decomposition and datasets."""
