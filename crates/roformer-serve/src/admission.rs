//! Admission: at most `--max-concurrent-requests` requests are queued or running at once; one
//! more is refused at once (429), so the backlog never grows without bound.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;

/// A bounded count of admitted requests.
#[derive(Debug, Clone)]
pub struct Admission {
    slots: Arc<Semaphore>,
    limit: usize,
}

/// One admitted request; its slot frees when this is dropped (answered, failed or cancelled).
#[derive(Debug)]
pub struct Permit {
    _permit: OwnedSemaphorePermit,
}

impl Admission {
    /// Room for `limit` requests at once.
    pub fn new(limit: usize) -> Admission {
        Admission {
            slots: Arc::new(Semaphore::new(limit)),
            limit,
        }
    }

    /// Admits a request, or refuses it without waiting.
    ///
    /// # Errors
    /// [`ApiError::Overloaded`] when every slot is taken.
    pub fn admit(&self) -> Result<Permit, ApiError> {
        match self.slots.clone().try_acquire_owned() {
            Ok(permit) => Ok(Permit { _permit: permit }),
            Err(_) => Err(ApiError::Overloaded { limit: self.limit }),
        }
    }

    /// Requests admitted now.
    pub fn in_flight(&self) -> usize {
        self.limit - self.slots.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_beyond_the_limit_and_frees_on_drop() {
        let admission = Admission::new(2);
        let a = admission.admit().unwrap();
        let _b = admission.admit().unwrap();
        assert_eq!(admission.in_flight(), 2);
        assert_eq!(
            admission.admit().unwrap_err(),
            ApiError::Overloaded { limit: 2 }
        );
        drop(a);
        assert_eq!(admission.in_flight(), 1);
        assert!(admission.admit().is_ok());
    }
}
