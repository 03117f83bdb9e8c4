"""The sleeping test model lives beside the cluster benchmark that also uses it."""

from sift_bench.cluster.sleeper import DIMS, SLEEPER_ADAPTER, SleeperAdapter, register, write_sleeper_entry

__all__ = ["DIMS", "SLEEPER_ADAPTER", "SleeperAdapter", "register", "write_sleeper_entry"]
