"""The data manifold: kNN graphs from features, graphs from edge lists, the normalised
Laplacian, row-block graph construction for large inputs, the input file readers, and
seeded synthetic graphs (planted partitions)."""
