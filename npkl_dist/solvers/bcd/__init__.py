"""Block coordinate descent for NPKL (bcdkl-tnnls2015, Alg. 1): the fit, its set-up, the
starts (spectral, coarse, propagated, random; completed to full rank), joint moves for the
hinge's kinks, the rank certificate, and BCD's in-process execution."""
