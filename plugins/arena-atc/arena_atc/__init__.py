"""arena-atc: an air-traffic-control Gymnasium environment as an Arena plugin."""

from arena_atc.env import AirTrafficEnv, heading_to_exit

__all__ = ["AirTrafficEnv", "heading_to_exit"]
