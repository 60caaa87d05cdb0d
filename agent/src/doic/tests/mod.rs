//! Simulation tests of the DOIC core.
