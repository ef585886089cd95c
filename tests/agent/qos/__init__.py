"""QoS loop tests that need nothing but a fake host tree."""
