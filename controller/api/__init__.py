"""The controller's gRPC API: proto, server and client."""
