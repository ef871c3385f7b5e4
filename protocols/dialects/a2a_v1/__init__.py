"""A2A 1.0 (a2a.proto, ProtoJSON on the wire): codec and JSON-RPC methods."""
