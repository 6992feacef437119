"""The mlsched controller: job store, scheduling loop, policies and the gRPC services."""
