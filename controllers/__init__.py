"""os-ken (maintained Ryu) applications, run by the testbed as their own process on 127.0.0.1."""
