"""Certificates and identities of a cluster: its small CA, the names certificates carry, and
the files clients and agents keep their credentials in (docs/wire.md, "Authentication")."""
