"""KL-ADMM (kl-admm-ijcai2013, Alg. 1): the fit, its compiled half-steps and iteration
loop, and its in-process execution."""
