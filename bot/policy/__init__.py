"""Pure decisions: the steer table, the authority table, the control phrases."""
