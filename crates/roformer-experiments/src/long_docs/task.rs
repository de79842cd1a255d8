//! `--task`: the two long-document tasks.

use serde::{Deserialize, Serialize};

use super::data::{authorship_dataset, collection_dataset, Collection, Dataset, Sizes};

/// `--task`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Task {
    /// Ten-poem documents labelled Tang shi, Song shi or Song ci.
    Collection,
    /// Which of two candidates is by the anchor's poet.
    Authorship,
}

impl Task {
    /// `collection` or `authorship`.
    pub fn name(self) -> &'static str {
        match self {
            Task::Collection => "collection",
            Task::Authorship => "authorship",
        }
    }

    /// The figures' title.
    pub fn title(self) -> &'static str {
        match self {
            Task::Collection => "Collection task",
            Task::Authorship => "Authorship task",
        }
    }

    /// The section's heading.
    pub fn heading(self) -> &'static str {
        match self {
            Task::Collection => "3. Long documents: Tang shi, Song shi or Song ci",
            Task::Authorship => {
                "3b. Long documents: which of two candidates is by the anchor's poet"
            }
        }
    }

    /// The shortest max length: room for `[CLS]`, `[SEP]` and a token per text.
    pub fn min_length(self) -> usize {
        match self {
            Task::Collection => 3,
            Task::Authorship => 7,
        }
    }

    /// Builds the task's dataset.
    pub fn build(self, collections: &[Collection], sizes: &Sizes) -> anyhow::Result<Dataset> {
        match self {
            Task::Collection => collection_dataset(collections, sizes),
            Task::Authorship => authorship_dataset(collections, sizes),
        }
    }
}
