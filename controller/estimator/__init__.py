"""UniSched Estimator (§III-B): runtime speed (Eq. 2), training iterations (learning curves),
suspend/resume overhead (Eq. 3) and duration (Eq. 1). Pure functions over observations."""
