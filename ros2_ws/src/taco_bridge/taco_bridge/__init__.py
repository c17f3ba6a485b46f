"""taco_bridge: ROS 2 nodes that run taco_ref sub-policies on a JACO arm (simulated or real).

policy_node  sketch + joint states in, joint efforts + status out (class PolicyNode)
sim_node     the MuJoCo JACO and dial pad of taco_sim.dial in real time (class SimNode)
dial         the demo without a ROS installation: both nodes as child processes
"""
