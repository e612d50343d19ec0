"""The job: a whole fit from input files (ingest, graph, plan, learn, evaluate, extend) in
a run store or in memory, as the CLI and the pipeline run it; the out-of-sample extension and
crash recovery."""
