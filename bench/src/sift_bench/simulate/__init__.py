"""Discrete-event simulator of the batching engine.

Replays arrival traces (sequential, bursts, Poisson) through the very policy
objects the worker uses, against a forward-time model ``F(n) = a + b*n`` and a
virtual clock, so policies can be compared deterministically in seconds.
"""
