"""Numerical building blocks, below every solver: ordered (reproducible) reductions, SIMD
row operations and intrinsics, CSR helpers, small box-constrained QPs and Cholesky solves,
smoothed-aggregation AMG, Lanczos and tridiagonal eigensolvers, L-BFGS-B, Anderson
acceleration, BLAS thread control and memory helpers. Nothing here knows the NPKL problem."""
