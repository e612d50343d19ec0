"""The block-exact method: the unconstrained rows solved at once by AMG-preconditioned CG
(layout, compiled U-block kernels, preconditioners, the CG steps, 2-D subspace searches by
Newton, Nelder-Mead and Brent, and the session that owns a fit's state)."""
