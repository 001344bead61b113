"""The cluster-fit engine: render what the cluster will run (render.py), model its nodes (model.py,
nodes.py), and check that every workload is scheduled, admitted, ordered and reachable (checks.py)."""
