"""taco_sim: the domains (Nav-World, the MuJoCo JACO Dial pad, Craft)."""
