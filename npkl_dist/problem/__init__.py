"""The NPKL problem: pair constraints and their sampling protocol, the problem model
(Laplacian, constraints, loss, gamma, rank), the objective (defined once; its compiled
per-row and per-pair terms in ``_terms``) and the result type every solver returns."""
