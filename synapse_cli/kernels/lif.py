"""Dynamic-tau leaky integrate-and-fire, seed 001 section 3.4, eqs. 16-18.

    tau_X dI/dt = -I(t) + sum_s S_s delta(t - t_s)                                   (16)
    tau_X dV/dt = -V(t) + I(t)                                                        (17)
    tau_X(t + dt) = tau_X(t) + (1 - exp(-dt)) / (1 + exp(-dt))   (dt = input interval) (18)

with tau_X starting at tau_init and used as tau_scale * tau_X (seed appendix C.1). Between
inputs the system is solved exactly (equal time constants): I(g) = I e^(-g/tau),
V(g) = (V + g I / tau) e^(-g/tau). An input of strength S makes I jump by S / tau; the node is
read one time unit after it (the seed's dt = 1 turn): a node whose potential is >= v_th then
fires and is reset to (v_rest, i_rest).

A node's state is not stored: it is replayed from its spike train (times[indptr[x]:
indptr[x+1]], float64 in scaled time units, ascending, each stored spike an input of strength
`spike_weight`), then the current stimulus stim[x] arrives at time `now`. A node with
stim[x] == 0 receives no input now and is read at `now`.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True)
def _advance(v, i, g, tau):
    e = math.exp(-g / tau)
    return (v + g * i / tau) * e, i * e


@njit(cache=True)
def node_taus(indptr, times, tau_init, out):
    """tau_X after each node's last spike (eq. 18, unscaled) into out[n]."""
    for x in range(len(indptr) - 1):
        tau = tau_init
        for s in range(indptr[x] + 1, indptr[x + 1]):
            tau += math.tanh(0.5 * max(times[s] - times[s - 1], 0.0))
        out[x] = tau
    return out


@njit(cache=True)
def membrane(indptr, times, nodes, stim, now, tau_init, tau_scale, v_th, v_rest, i_rest,
             spike_weight, dynamic, out_v, out_fired):
    """Membrane potential of each node nodes[k] at `now` (+1 unit when stimulated now, with
    strength stim[k]) into out_v[k], and whether it fires into out_fired[k].
    indptr int64[n+1]; times float64[m]; nodes int64[k]; stim, out_v float64[k]; out_fired
    bool[k]. dynamic=False keeps tau at tau_init (seed Table 3's ablation)."""
    for k in range(len(nodes)):
        x = nodes[k]
        lo, hi = indptr[x], indptr[x + 1]
        tau = tau_init
        v = 0.0
        i = 0.0
        t_state = times[lo] if hi > lo else now
        last = t_state
        for s in range(lo, hi + 1):
            if s < hi:
                t, w = times[s], spike_weight
            else:
                t, w = now, stim[k]
                if w == 0.0:  # no input now: the potential the node has decayed to
                    v, i = _advance(v, i, max(t - t_state, 0.0), tau_scale * tau)
                    out_v[k] = v
                    out_fired[k] = v >= v_th
                    break
            if s > lo and dynamic:
                tau += math.tanh(0.5 * max(t - last, 0.0))  # eq. 18
            last = t
            teff = tau_scale * tau
            v, i = _advance(v, i, max(t - t_state, 0.0), teff)
            i += w / teff                                   # eq. 16, the delta input
            t_state = max(t, t_state)
            rv, ri = _advance(v, i, 1.0, teff)              # read one time unit later
            if s == hi:
                out_v[k] = rv
                out_fired[k] = rv >= v_th
            elif rv >= v_th:                                # a past firing: reset
                v, i, t_state = v_rest, i_rest, t_state + 1.0
    return out_v, out_fired
