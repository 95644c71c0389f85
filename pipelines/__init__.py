"""Corpus pipelines: C4 rules as pure functions and the Apache Beam glue that runs them."""
