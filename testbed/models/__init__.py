"""Pure reference models (no root, no processes): independent of the code they are compared with."""
