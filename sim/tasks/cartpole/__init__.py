"""The cart-pole (MuJoCo), the suite's small learning check."""
