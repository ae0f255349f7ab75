"""The deployment search: layouts that fit, priced by the serving model, ranked under the objective, with the
Pareto frontier, near ties and the hints of a request that does not fit."""
