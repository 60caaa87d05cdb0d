//! Simulation tests of the DOIC core: an in-memory network of clients, agents
//! and reporting servers with a simulated clock ([`sim`]).

mod evidence;
mod fixtures;
mod lifecycle;
mod precision;
mod props;
mod rules;
mod seed002;
mod seed002_workers;
mod sim;
mod topologies;
mod workers;
