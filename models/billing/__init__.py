"""What a run costs: the price table (data in models/data/prices.toml), serverless per-second billing
of actors and learner, the fixed server cluster's bill, IMPACT's bill, and the budget rule's upper
bound on a round's cost. Pure arithmetic.
"""
