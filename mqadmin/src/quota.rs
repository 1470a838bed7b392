//! `quota`: the broker's quota rules (its live `quotas` key) listed, set and removed one
//! rule at a time, over RocketMQ's GET_BROKER_CONFIG and UPDATE_BROKER_CONFIG, so the
//! commands work wherever `updateBrokerConfig -k quotas` does. A rule is
//! `account|topic|group:<name>:<limit>=<N>`; the broker checks it and refuses a bad one.

use std::io::{self, Write};

use anyhow::{bail, Context};
use remoting::codes::request;
use serde::Serialize;

use crate::broker_admin::{parse_properties, update_broker_config};
use crate::output::Render;
use crate::remoting_client::{call, Request};
use crate::rmq::Core;

/// Each broker's rules after the command.
#[derive(Debug, Serialize)]
pub struct QuotaRules {
    brokers: Vec<BrokerRules>,
}

#[derive(Debug, Serialize)]
pub struct BrokerRules {
    broker_name: String,
    addr: String,
    rules: Vec<String>,
}

impl Render for QuotaRules {
    fn text(&self, w: &mut dyn Write) -> io::Result<()> {
        for b in &self.brokers {
            writeln!(
                w,
                "{} ({}): {} rule(s)",
                b.broker_name,
                b.addr,
                b.rules.len()
            )?;
            for r in &b.rules {
                writeln!(w, "  {r}")?;
            }
        }
        Ok(())
    }
}

/// The rules of a `quotas` value, one per entry, as written.
fn split_rules(value: &str) -> Vec<String> {
    value
        .split([',', ';'])
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_owned)
        .collect()
}

/// What names a rule: `scope:name:limit`, without its value.
fn rule_key(rule: &str) -> &str {
    rule.split_once('=').map_or(rule, |(k, _)| k).trim()
}

fn check_key(key: &str) -> anyhow::Result<()> {
    let fields: Vec<&str> = key.splitn(3, ':').collect();
    match fields.as_slice() {
        [scope, name, limit]
            if ["account", "topic", "group"].contains(scope)
                && !name.is_empty()
                && !limit.is_empty() =>
        {
            Ok(())
        }
        _ => bail!("`{key}` does not name a rule: account|topic|group:<name>:<limit>"),
    }
}

fn rules_of(t: &Core) -> anyhow::Result<Vec<String>> {
    let body = call(&t.addr, Request::new(request::GET_BROKER_CONFIG))?.ok(&t.addr)?;
    let text = std::str::from_utf8(&body).context("the broker's config is not UTF-8")?;
    let config = parse_properties(text);
    let Some(value) = config.get("quotas") else {
        bail!("{} has no `quotas` key: not a corvus broker", t.addr);
    };
    Ok(split_rules(value))
}

pub fn list(targets: Vec<Core>) -> anyhow::Result<QuotaRules> {
    let mut brokers = Vec::with_capacity(targets.len());
    for t in targets {
        let rules = rules_of(&t)?;
        brokers.push(BrokerRules {
            broker_name: t.broker_name,
            addr: t.addr,
            rules,
        });
    }
    Ok(QuotaRules { brokers })
}

/// Applies `change` to each broker's rules and writes them back; the first refusal ends the
/// command with the broker's answer.
fn change(
    targets: Vec<Core>,
    change: impl Fn(&mut Vec<String>) -> anyhow::Result<()>,
) -> anyhow::Result<QuotaRules> {
    let mut brokers = Vec::with_capacity(targets.len());
    for t in targets {
        let mut rules = rules_of(&t)?;
        change(&mut rules).with_context(|| format!("on {}", t.addr))?;
        let value = rules.join(",");
        update_broker_config(vec![t.clone()], "quotas", &value)?;
        brokers.push(BrokerRules {
            broker_name: t.broker_name,
            addr: t.addr,
            rules,
        });
    }
    Ok(QuotaRules { brokers })
}

/// Adds `rule` (`scope:name:limit=N`), or replaces the rule of the same scope, name and
/// limit.
pub fn set(targets: Vec<Core>, rule: &str) -> anyhow::Result<QuotaRules> {
    let rule = rule.trim();
    let Some((key, value)) = rule.split_once('=') else {
        bail!("a rule is account|topic|group:<name>:<limit>=<N>; `{rule}` has no `=`");
    };
    check_key(key.trim())?;
    if value.trim().is_empty() || rule.contains([',', ';', '\n']) {
        bail!("`{rule}` is not one rule with a value");
    }
    change(targets, |rules| {
        match rules.iter_mut().find(|r| rule_key(r) == key.trim()) {
            Some(r) => *r = rule.to_owned(),
            None => rules.push(rule.to_owned()),
        }
        Ok(())
    })
}

/// Removes the rule of `key` (`scope:name:limit`, with or without its value); a broker
/// without it is an error, so a typo is not taken for a removal.
pub fn remove(targets: Vec<Core>, key: &str) -> anyhow::Result<QuotaRules> {
    let key = rule_key(key);
    check_key(key)?;
    change(targets, |rules| {
        let before = rules.len();
        rules.retain(|r| rule_key(r) != key);
        if rules.len() == before {
            bail!("no rule `{key}`");
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_split_and_named_by_scope_name_and_limit() {
        let rules = split_rules(" account:a:connections=2 ;topic:T:send_bytes_per_sec=10,, ");
        assert_eq!(
            rules,
            ["account:a:connections=2", "topic:T:send_bytes_per_sec=10"]
        );
        assert_eq!(rule_key(&rules[1]), "topic:T:send_bytes_per_sec");
        assert_eq!(rule_key("group:G:pulls_per_sec"), "group:G:pulls_per_sec");
        assert!(check_key("group:G:pulls_per_sec").is_ok());
        assert!(check_key("tenant:G:pulls_per_sec").is_err());
        assert!(check_key("group::pulls_per_sec").is_err());
        assert!(check_key("group:G").is_err());
    }
}
