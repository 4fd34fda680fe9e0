"""A slot among its peers: following the control and commits topics (the cap), its lease and
failover, a staged launch's hold, progress reports, the standby's CPU priority."""
