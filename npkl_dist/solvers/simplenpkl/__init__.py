"""SimpleNPKL (simplenpkl-jmlr2011 §4-5): the linear loss in closed form by a sparse
eigendecomposition and the other losses by the saddle-point iteration; the eigensolvers and
operators they use."""
