//! Diameter peers (RFC 6733 §2.1, §5): the watchdog of RFC 3539 and the
//! capability exchange and peer state machine of RFC 6733 §5.3 and §5.6.
//! Sans-io: nothing here owns a socket or reads a clock.

pub mod capx;
pub mod fsm;
pub mod watchdog;
