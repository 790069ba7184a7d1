//! The brokers a backend may connect to: one URL, or the nodes of a cluster in order.
//!
//! A list is written as URLs separated by commas (`amqp://a:5672/%2f,amqp://b:5672/%2f`).
//! A comma splits the list only where an `amqp://` or `amqps://` URL follows it, so a
//! password with an unencoded comma stays in its URL. The URLs carry credentials: only
//! their redacted forms leave this module.

use super::url::redact;
use crate::broker::BrokerError;

/// The broker nodes, in the order they are tried.
#[derive(Debug)]
pub(super) struct Nodes {
    /// Carry credentials: never logged, never put in an error.
    urls: Vec<String>,
    /// The same URLs as logs and errors show them.
    shown: Vec<String>,
}

impl Nodes {
    /// The nodes of `list`; an empty list is refused.
    pub(super) fn parse(list: &str) -> Result<Self, BrokerError> {
        let urls = split(list);
        if urls.is_empty() {
            return Err(BrokerError::Connection(
                "no broker URL given: pass `--amqp amqp://user@host:5672/%2f`".to_owned(),
            ));
        }
        let shown = urls.iter().map(|url| redact(url)).collect();
        Ok(Self { urls, shown })
    }

    /// How many nodes there are.
    pub(super) fn len(&self) -> usize {
        self.urls.len()
    }

    /// The URL of node `index` (wrapping around), credentials included.
    pub(super) fn url(&self, index: usize) -> &str {
        &self.urls[index % self.urls.len()]
    }

    /// Node `index` (wrapping around) as logs show it.
    pub(super) fn shown(&self, index: usize) -> &str {
        &self.shown[index % self.shown.len()]
    }

    /// Every node as logs show them, comma-separated.
    pub(super) fn shown_all(&self) -> String {
        self.shown.join(", ")
    }
}

/// Split a comma-separated list where the next part starts a new AMQP URL.
fn split(list: &str) -> Vec<String> {
    let mut urls: Vec<String> = Vec::new();
    for part in list.split(',') {
        let starts_url = {
            let trimmed = part.trim_start();
            trimmed.starts_with("amqp://") || trimmed.starts_with("amqps://")
        };
        match urls.last_mut() {
            Some(last) if !starts_url => {
                last.push(',');
                last.push_str(part);
            }
            _ => urls.push(part.trim().to_owned()),
        }
    }
    urls.retain(|url| {
        !url.trim_matches(|c: char| c == ',' || c.is_whitespace())
            .is_empty()
    });
    urls
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comma_list_is_split_into_nodes_tried_in_order() {
        let nodes = Nodes::parse("amqp://u:p@a:5681/%2f, amqp://u:p@b:5682/%2f,amqps://c/%2f")
            .expect("a list");
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes.url(1), "amqp://u:p@b:5682/%2f");
        assert_eq!(nodes.url(3), nodes.url(0), "the order wraps around");
        assert_eq!(
            nodes.shown_all(),
            "amqp://u:***@a:5681/%2f, amqp://u:***@b:5682/%2f, amqps://c/%2f"
        );
    }

    #[test]
    fn a_comma_inside_a_password_does_not_split_the_url() {
        let nodes = Nodes::parse("amqp://u:se,cret@a/%2f,amqp://u:x@b/%2f").expect("a list");
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes.url(0), "amqp://u:se,cret@a/%2f");
        assert!(!nodes.shown_all().contains("cret"), "{}", nodes.shown_all());
    }

    #[test]
    fn an_empty_list_is_refused() {
        assert!(Nodes::parse(" , ").is_err());
    }
}
