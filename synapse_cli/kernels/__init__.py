"""numba kernels. Importing any of them makes OpenMP worker threads wait passively.

With libgomp's default (spin before sleeping), a parallel kernel's idle workers keep spinning
after the region ends and compete with the caller for the CPU; on a busy 2-core machine one
small header scan then takes 15-30 ms instead of 0.03 ms (bench/speed/recall_speed.py). Set before
numba starts its OpenMP pool; an explicit OMP_WAIT_POLICY in the environment wins.
"""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
