"""Who is calling the controller and what they may do: peer identities from TLS, one-time
join tokens, the node bootstrap service, per-user rate and stream limits, spec size limits."""
