"""The solvers, one sub-package each, and what they share.

Shared, lowest: ``_plan`` (locality order, colouring, sweep plans, the prepared problem),
``_kkt`` (the stationarity measure every solver can stop on), ``_sweeps`` (the exact row
updates of BCD, also the block method's constrained rows), ``_colouring``.
``block``: the block-exact method (unconstrained rows by AMG-preconditioned CG, 2-D searches).
``bcd``: block coordinate descent (bcdkl-tnnls2015), its starts, set-up, joint moves, and the
dispatch to the block method. ``admm``: KL-ADMM (kl-admm-ijcai2013). ``simplenpkl``:
SimpleNPKL (simplenpkl-jmlr2011). Each solver's in-process execution (``_local``) is the
oracle the executors are tested against."""
