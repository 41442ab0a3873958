//! Kafka's `ssl.principal.mapping.rules` (KIP-371): turn a certificate's distinguished
//! name into a short principal name.
//!
//! ```text
//! RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/, RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L, DEFAULT
//! ```
//!
//! Rules are tried in order; the first whose pattern matches the whole DN wins. `DEFAULT`
//! keeps the DN. `L`/`U` lower- or upper-case the result. Inside a rule, '/' ends the
//! pattern and the replacement unless escaped as `\/`, and commas are part of them: a rule
//! list is split by scanning each rule to its closing '/', never by splitting at commas.
//!
//! Patterns are Rust `regex` syntax, which agrees with Java's for what mapping rules use
//! (classes, groups, lazy quantifiers, anchors); look-around and back-references are
//! refused at parse time. The replacement follows Java's `Matcher.replaceAll` with
//! Kafka's twist: `$n` is group n (taking as many digits as name an existing group), `${name}`
//! a named group, `\x` a literal x, and a `$n` beyond the pattern's groups is kept as
//! literal text (Kafka escapes it before calling Java).

use std::fmt;

use regex::{Captures, Regex};

use crate::error::RuleError;

/// A parsed `ssl.principal.mapping.rules` value.
#[derive(Clone)]
pub struct PrincipalMapper {
    rules: Vec<Rule>,
}

#[derive(Clone)]
enum Rule {
    Default,
    Replace(Box<ReplaceRule>),
}

#[derive(Clone)]
struct ReplaceRule {
    /// The rule as written, for `Debug`.
    text: String,
    /// The pattern as written, for Java's find-and-replace loop.
    search: Regex,
    /// The pattern anchored at both ends: Java's `Matcher.matches()`.
    whole: Regex,
    replacement: Vec<Piece>,
    case: Case,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Case {
    Keep,
    Lower,
    Upper,
}

#[derive(Clone, PartialEq, Eq, Debug)]
enum Piece {
    Literal(String),
    Group(usize),
}

impl PrincipalMapper {
    /// Parses a rules value. An empty value (or only commas) has no rules, so that every DN
    /// is kept by [`map`](Self::map) and refused by [`try_map`](Self::try_map).
    pub fn parse(rules: &str) -> Result<Self, RuleError> {
        let rules = split_rules(rules)?
            .into_iter()
            .map(|raw| match raw {
                RawRule::Default => Ok(Rule::Default),
                RawRule::Replace {
                    text,
                    pattern,
                    replacement,
                    case,
                } => ReplaceRule::compile(text, pattern, replacement, case)
                    .map(|rule| Rule::Replace(Box::new(rule))),
            })
            .collect::<Result<_, _>>()?;
        Ok(PrincipalMapper { rules })
    }

    /// The principal name for `dn`: the first matching rule's result, or `dn` itself when
    /// no rule matches.
    ///
    /// Kafka instead fails the connection when no rule matches (its `SslPrincipalMapper`
    /// throws `NoMatchingRule`); use [`try_map`](Self::try_map) for that behaviour. With a
    /// `DEFAULT` rule last, as Kafka's default value has, the two agree.
    pub fn map(&self, dn: &str) -> String {
        self.try_map(dn).unwrap_or_else(|| dn.to_owned())
    }

    /// The first matching rule's result, or `None` when no rule matches (where Kafka
    /// refuses the client).
    pub fn try_map(&self, dn: &str) -> Option<String> {
        self.rules.iter().find_map(|rule| match rule {
            Rule::Default => Some(dn.to_owned()),
            Rule::Replace(rule) => rule.apply(dn),
        })
    }
}

/// Kafka's default `ssl.principal.mapping.rules`: the DN as it is.
impl Default for PrincipalMapper {
    fn default() -> Self {
        PrincipalMapper {
            rules: vec![Rule::Default],
        }
    }
}

impl fmt::Debug for PrincipalMapper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.rules.iter().map(|rule| match rule {
                Rule::Default => "DEFAULT",
                Rule::Replace(rule) => rule.text.as_str(),
            }))
            .finish()
    }
}

impl ReplaceRule {
    fn compile(
        text: &str,
        pattern: &str,
        replacement: &str,
        case: Case,
    ) -> Result<Self, RuleError> {
        let pattern_error = |e: regex::Error| RuleError::Pattern {
            rule: text.to_owned(),
            reason: e.to_string(),
        };
        // Compiled alone first: anchoring could otherwise make a broken pattern such as
        // "a)(b" compile.
        let search = Regex::new(pattern).map_err(pattern_error)?;
        let whole = Regex::new(&format!(r"\A(?:{pattern})\z")).map_err(pattern_error)?;
        let replacement =
            parse_replacement(replacement, &search).map_err(|reason| RuleError::Replacement {
                rule: text.to_owned(),
                reason,
            })?;
        Ok(ReplaceRule {
            text: text.to_owned(),
            search,
            whole,
            replacement,
            case,
        })
    }

    /// Kafka's `Rule.apply`: only a pattern matching the whole DN applies, and then the
    /// replacement goes in at every match, as `String.replaceAll` does.
    fn apply(&self, dn: &str) -> Option<String> {
        if !self.whole.is_match(dn) {
            return None;
        }
        let mut out = String::with_capacity(dn.len());
        let mut copied_to = 0;
        let mut search_from = 0;
        // Java's find loop: after an empty match, the next search starts one character on,
        // so ".*" matches "abc" and then the empty end ("X" for ".*" gives "XX", as in Java).
        while search_from <= dn.len() {
            let Some(captures) = self.search.captures_at(dn, search_from) else {
                break;
            };
            let Some(found) = captures.get(0) else {
                break;
            };
            out.push_str(&dn[copied_to..found.start()]);
            self.expand(&captures, &mut out);
            copied_to = found.end();
            search_from = if found.is_empty() {
                dn[found.end()..]
                    .chars()
                    .next()
                    .map_or(dn.len() + 1, |c| found.end() + c.len_utf8())
            } else {
                found.end()
            };
        }
        out.push_str(&dn[copied_to..]);
        Some(match self.case {
            Case::Keep => out,
            Case::Lower => out.to_lowercase(),
            Case::Upper => out.to_uppercase(),
        })
    }

    fn expand(&self, captures: &Captures<'_>, out: &mut String) {
        for piece in &self.replacement {
            match piece {
                Piece::Literal(text) => out.push_str(text),
                // A group that took no part in the match adds nothing, as in Java.
                Piece::Group(index) => {
                    if let Some(group) = captures.get(*index) {
                        out.push_str(group.as_str());
                    }
                }
            }
        }
    }
}

/// Java's replacement syntax, with Kafka's escaping of out-of-range `$n`. Errors are what
/// Java would throw at the first match; here they refuse the rule up front.
fn parse_replacement(replacement: &str, pattern: &Regex) -> Result<Vec<Piece>, String> {
    let groups = pattern.captures_len() - 1;
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut chars = replacement.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped) => literal.push(escaped),
                None => return Err("a trailing '\\' escapes nothing".into()),
            },
            '$' => match chars.peek().copied() {
                Some('{') => {
                    chars.next();
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => name.push(c),
                            None => return Err("`${` without a closing `}`".into()),
                        }
                    }
                    let index = pattern
                        .capture_names()
                        .position(|n| n == Some(name.as_str()))
                        .ok_or_else(|| format!("no group named `{name}` in the pattern"))?;
                    flush(&mut literal, &mut pieces);
                    pieces.push(Piece::Group(index));
                }
                Some(d) if d.is_ascii_digit() => {
                    let first = d as usize - '0' as usize;
                    if first > groups {
                        if groups == 0 {
                            return Err(format!(
                                "${first} refers to a group, but the pattern has none"
                            ));
                        }
                        // Kafka turns an out-of-range reference into literal text; the
                        // digits follow as ordinary characters.
                        literal.push('$');
                        continue;
                    }
                    chars.next();
                    let mut index = first;
                    // Java takes more digits while they still name an existing group.
                    while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                        let longer = index * 10 + d as usize;
                        if longer > groups {
                            break;
                        }
                        index = longer;
                        chars.next();
                    }
                    flush(&mut literal, &mut pieces);
                    pieces.push(Piece::Group(index));
                }
                _ => return Err("'$' must be followed by a group number or {name}".into()),
            },
            _ => literal.push(c),
        }
    }
    flush(&mut literal, &mut pieces);
    Ok(pieces)
}

fn flush(literal: &mut String, pieces: &mut Vec<Piece>) {
    if !literal.is_empty() {
        pieces.push(Piece::Literal(std::mem::take(literal)));
    }
}

/// One rule as split from the list, before compiling.
#[derive(Debug, PartialEq, Eq)]
enum RawRule<'a> {
    Default,
    Replace {
        text: &'a str,
        pattern: &'a str,
        replacement: &'a str,
        case: Case,
    },
}

/// Splits a rules value the way Kafka's `RULE_SPLITTER` regex does, for each rule in turn:
/// `DEFAULT`, or `RULE:` + pattern + '/' + replacement + '/' + optional L or U, or else
/// anything up to the next comma (empty: skipped; otherwise an invalid rule).
fn split_rules(rules: &str) -> Result<Vec<RawRule<'_>>, RuleError> {
    let rules = rules.trim_matches(is_java_space);
    let mut parsed = Vec::new();
    let mut pos = 0;
    while pos < rules.len() {
        let rest = rules[pos..].trim_start_matches(is_java_space);
        pos = rules.len() - rest.len();
        if rest.is_empty() {
            break;
        }
        if let Some(after) = rest.strip_prefix("DEFAULT") {
            if let Some(separator) = separator_len(after) {
                parsed.push(RawRule::Default);
                pos += "DEFAULT".len() + separator;
                continue;
            }
        }
        if let Some(body) = rest.strip_prefix("RULE:") {
            if let Some((pattern, replacement, case, after_flag)) = rule_body(body) {
                let rule_len = rest.len() - after_flag.len();
                // Whatever follows the rule up to the next comma must be blank.
                let tail_end = after_flag.find(',').unwrap_or(after_flag.len());
                let tail = after_flag[..tail_end].trim_end_matches(is_java_space);
                let text = &rest[..rule_len + tail.len()];
                if !tail.is_empty() {
                    return Err(RuleError::Syntax {
                        rule: text.to_owned(),
                        reason: format!("unexpected `{tail}` after the rule's closing '/'"),
                    });
                }
                parsed.push(RawRule::Replace {
                    text,
                    pattern,
                    replacement,
                    case,
                });
                pos += rule_len + separator_len(after_flag).unwrap_or(0);
                continue;
            }
        }
        let chunk_end = rest.find(',').unwrap_or(rest.len());
        let chunk = rest[..chunk_end].trim_end_matches(is_java_space);
        if !chunk.is_empty() {
            return Err(RuleError::Syntax {
                rule: chunk.to_owned(),
                reason: "expected DEFAULT or RULE:pattern/replacement/ with an optional L or U"
                    .into(),
            });
        }
        pos += chunk_end + separator_len(&rest[chunk_end..]).unwrap_or(0);
    }
    Ok(parsed)
}

/// After `RULE:`: the pattern and the replacement, each ended by an unescaped '/', then an
/// optional L or U. Returns them and the text after the flag; `None` without two closing
/// slashes.
fn rule_body(body: &str) -> Option<(&str, &str, Case, &str)> {
    let pattern_end = closing_slash(body)?;
    let after_pattern = &body[pattern_end + 1..];
    let replacement_end = closing_slash(after_pattern)?;
    let after = &after_pattern[replacement_end + 1..];
    let (case, after_flag) = if let Some(rest) = after.strip_prefix('L') {
        (Case::Lower, rest)
    } else if let Some(rest) = after.strip_prefix('U') {
        (Case::Upper, rest)
    } else {
        (Case::Keep, after)
    };
    Some((
        &body[..pattern_end],
        &after_pattern[..replacement_end],
        case,
        after_flag,
    ))
}

/// Index of the first '/' not escaped by '\'. A '\' escapes any one character.
fn closing_slash(text: &str) -> Option<usize> {
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                // A final '\' escapes nothing: no closing slash (Kafka's `\\.` fails too).
                chars.next()?;
            }
            '/' => return Some(i),
            _ => {}
        }
    }
    None
}

/// Kafka's rule separator `\s*(,\s*|$)`: its length if `text` starts with one.
fn separator_len(text: &str) -> Option<usize> {
    let after_space = text.trim_start_matches(is_java_space);
    if after_space.is_empty() {
        return Some(text.len());
    }
    let after_comma = after_space.strip_prefix(',')?;
    Some(text.len() - after_comma.trim_start_matches(is_java_space).len())
}

/// Java regex `\s`.
fn is_java_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0B' | '\x0C' | '\r')
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    /// Kafka's documented example (docs "SSL principal mapping rules").
    const KAFKA_DOC_RULES: &str = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,\
        RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,\
        RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,\
        DEFAULT";

    fn mapper(rules: &str) -> PrincipalMapper {
        PrincipalMapper::parse(rules).unwrap()
    }

    /// The rules as Kafka's `SslPrincipalMapper.toString` would list them.
    fn listed(rules: &str) -> Vec<String> {
        split_rules(rules)
            .unwrap()
            .into_iter()
            .map(|raw| match raw {
                RawRule::Default => "DEFAULT".to_owned(),
                RawRule::Replace {
                    pattern,
                    replacement,
                    case,
                    ..
                } => {
                    let flag = match case {
                        Case::Keep => "",
                        Case::Lower => "/L",
                        Case::Upper => "/U",
                    };
                    format!("RULE:{pattern}/{replacement}{flag}")
                }
            })
            .collect()
    }

    #[test]
    fn kafka_documented_examples() {
        let m = mapper(KAFKA_DOC_RULES);
        assert_eq!(
            m.map("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"),
            "serviceuser"
        );
        assert_eq!(
            m.map("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"),
            "adminuser@admin"
        );
        let upper = mapper("RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/U");
        assert_eq!(
            upper.map("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"),
            "ADMINUSER@ADMIN"
        );
    }

    #[test]
    fn first_matching_rule_wins_with_case_flags() {
        let m = mapper(
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, \
             RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, \
             RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, \
             RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U, \
             DEFAULT",
        );
        assert_eq!(m.map("CN=Duke,OU=ServiceUsers,O=Org,C=US"), "duke");
        assert_eq!(
            m.map("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US"),
            "duke@sme"
        );
        assert_eq!(m.map("cn=duke,ou=sme,dc=mycp,dc=com"), "DUKE@SME");
        assert_eq!(m.map("cN=duke,OU=JavaSoft,O=Sun Microsystems"), "DUKE");
        assert_eq!(
            m.map("OU=JavaSoft,O=Sun Microsystems,C=US"),
            "OU=JavaSoft,O=Sun Microsystems,C=US"
        );
    }

    #[test]
    fn default_keeps_the_dn() {
        let dn = "CN=alice,OU=payments,O=Bank,C=DE";
        assert_eq!(mapper("DEFAULT").map(dn), dn);
        assert_eq!(PrincipalMapper::default().try_map(dn).as_deref(), Some(dn));
    }

    #[test]
    fn no_match_keeps_the_dn_in_map_and_is_none_in_try_map() {
        let m = mapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/");
        let dn = "CN=alice,OU=payments,O=Bank,C=DE";
        assert_eq!(m.map(dn), dn);
        assert_eq!(m.try_map(dn), None);
        assert_eq!(mapper("").try_map(dn), None);
    }

    #[test]
    fn pattern_must_match_the_whole_dn() {
        let m = mapper("RULE:CN=([a-z]+)/$1/");
        assert_eq!(m.try_map("CN=alice,O=Bank"), None);
        assert_eq!(m.try_map("CN=alice").as_deref(), Some("alice"));
    }

    #[test]
    fn replacement_goes_in_at_every_match_like_java() {
        // Java: "abc".replaceAll(".*", "X") is "XX" (the match, then the empty end).
        assert_eq!(mapper("RULE:.*/X/").map("abc"), "XX");
        assert_eq!(mapper("RULE:(.*)/<$1>/").map("abc"), "<abc><>");
        assert_eq!(mapper("RULE:^(.*)$/<$1>/").map("abc"), "<abc>");
    }

    #[test]
    fn commas_and_escaped_slashes_stay_in_patterns() {
        let m = mapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT");
        assert_eq!(
            m.map(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz"),
            r"Tkac\, Adam"
        );
        let m = mapper(r"RULE:^CN=([^,]+),O=a\/b$/$1\/x/");
        assert_eq!(m.map("CN=bob,O=a/b"), "bob/x");
    }

    #[test]
    fn rules_split_as_kafka_splits_them() {
        assert!(listed("").is_empty());
        assert_eq!(listed("DEFAULT"), ["DEFAULT"]);
        assert_eq!(listed("RULE://"), ["RULE:/"]);
        assert_eq!(listed("RULE:/.*/"), ["RULE:/.*"]);
        assert_eq!(listed("RULE:/.*/L"), ["RULE:/.*/L"]);
        assert_eq!(listed("RULE://,DEFAULT"), ["RULE:/", "DEFAULT"]);
        assert_eq!(listed("  RULE:// ,  DEFAULT  "), ["RULE:/", "DEFAULT"]);
        assert_eq!(
            listed("  RULE:   /     / ,  DEFAULT  "),
            ["RULE:   /     ", "DEFAULT"]
        );
        assert_eq!(
            listed("  RULE:  /     /U   ,DEFAULT  "),
            ["RULE:  /     /U", "DEFAULT"]
        );
        assert_eq!(
            listed("  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  "),
            ["RULE:([A-Z]*)/$1/U", "RULE:([a-z]+)/$1", "DEFAULT"]
        );
        // Empty rules are skipped.
        assert!(listed(",   , , ,      , , ,   ").is_empty());
        assert_eq!(listed(",,RULE://,,,DEFAULT,,"), ["RULE:/", "DEFAULT"]);
        assert_eq!(
            listed(",  , RULE: /   /    ,,,   DEFAULT, ,   "),
            ["RULE: /   ", "DEFAULT"]
        );
        // Escapes stay as written in the pattern and the replacement.
        assert_eq!(
            listed(r"RULE:\/\\\(\)\n\t/\/\//"),
            [r"RULE:\/\\\(\)\n\t/\/\/"]
        );
        assert_eq!(
            listed(r"RULE:\**\/+/*/L,RULE:\/*\**/**/"),
            [r"RULE:\**\/+/*/L", r"RULE:\/*\**/**"]
        );
        // Rules whose patterns look like rules.
        assert_eq!(
            listed(
                r"RULE:,RULE:,/,RULE:,\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT"
            ),
            [
                r"RULE:,RULE:,/,RULE:,\//U",
                "RULE:,/RULE:,",
                "RULE:,RULE:,/L,RULE:,/L",
                "RULE:, DEFAULT, /DEFAULT",
                "DEFAULT"
            ]
        );
    }

    #[test]
    fn kafkas_valid_rules_parse() {
        for rules in [
            "DEFAULT",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
            "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
            "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/",
            "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
            "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U",
            "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
            "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/",
            r"RULE:\/\\\(\)\n\t/\/\//",
            r"RULE:\**\/+/*/L,RULE:\/*\**/**/",
            KAFKA_DOC_RULES,
        ] {
            assert!(PrincipalMapper::parse(rules).is_ok(), "{rules}");
        }
    }

    #[test]
    fn kafkas_invalid_rules_are_refused_by_name() {
        for (rules, named) in [
            ("default", "default"),
            ("DEFAUL", "DEFAUL"),
            ("DEFAULT/L", "DEFAULT/L"),
            ("DEFAULT/U", "DEFAULT/U"),
            ("RULE:CN=(.*?),OU=ServiceUsers.*/$1", "RULE:CN=(.*?)"),
            ("rule:^CN=(.*?),OU=ServiceUsers.*$/$1/", "rule:^CN=(.*?)"),
            (
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
                "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
            ),
            ("RULE:^CN=(.*?),OU=ServiceUsers.*$/L", "RULE:^CN=(.*?)"),
            ("RULE:^CN=(.*?),OU=ServiceUsers.*$/U", "RULE:^CN=(.*?)"),
            ("RULE:^CN=(.*?),OU=ServiceUsers.*$/LU", "RULE:^CN=(.*?)"),
            ("DEFAULT, bogus", "bogus"),
        ] {
            let err = PrincipalMapper::parse(rules).unwrap_err();
            assert!(
                matches!(&err, RuleError::Syntax { rule, .. } if rule == named),
                "{rules} gave {err:?}"
            );
        }
    }

    #[test]
    fn bad_patterns_and_replacements_are_refused() {
        assert!(matches!(
            PrincipalMapper::parse("RULE:^CN=(.*$/$1/"),
            Err(RuleError::Pattern { .. })
        ));
        // Java-only syntax: look-ahead.
        assert!(matches!(
            PrincipalMapper::parse("RULE:^CN=(?=x)(.*)$/$1/"),
            Err(RuleError::Pattern { .. })
        ));
        // Anchoring must not rescue a broken pattern.
        assert!(matches!(
            PrincipalMapper::parse("RULE:a)(b/x/"),
            Err(RuleError::Pattern { .. })
        ));
        for replacement in ["$", "$x", "${missing}", "$1"] {
            let rules = format!("RULE:^CN=.*$/{replacement}/");
            assert!(
                matches!(
                    PrincipalMapper::parse(&rules),
                    Err(RuleError::Replacement { .. })
                ),
                "{rules}"
            );
        }
    }

    #[test]
    fn replacement_references_follow_java_and_kafka() {
        let three = "RULE:^(a)(b)(c)$";
        let map = |replacement: &str| mapper(&format!("{three}/{replacement}/")).map("abc");
        assert_eq!(map("$1@$4"), "a@$4"); // out of range: literal, as Kafka escapes it
        assert_eq!(map("$12"), "a2"); // greedy only while the group exists
        assert_eq!(map("$0"), "abc");
        assert_eq!(map("$03"), "c"); // Java reads "$03" as group 3
        assert_eq!(map(r"\$1"), "$1");
        assert_eq!(map("[$3$2$1]"), "[cba]");
        let named = mapper("RULE:^CN=(?P<user>[^,]+).*$/${user}!/");
        assert_eq!(named.map("CN=eve,O=x"), "eve!");
        // A group that did not take part adds nothing.
        assert_eq!(mapper("RULE:^(a)|(b)$/[$1$2]/").map("b"), "[b]");
    }

    #[test]
    fn debug_lists_the_rules() {
        let m = mapper("RULE:^CN=(.*?),.*$/$1/L, DEFAULT");
        assert_eq!(
            format!("{m:?}"),
            r#"["RULE:^CN=(.*?),.*$/$1/L", "DEFAULT"]"#
        );
    }

    proptest! {
        #[test]
        fn arbitrary_rule_text_never_panics(rules in ".{0,60}") {
            if let Ok(m) = PrincipalMapper::parse(&rules) {
                let _ = m.map("CN=alice,OU=payments,O=Bank,C=DE");
            }
        }

        #[test]
        fn rule_shaped_text_never_panics(
            rules in r"((RULE:[a-z\\/,(.*)$^]{0,8}/[a-z$0-9\\{}]{0,6}/[LUx]?|DEFAULT|[ ,]{0,2}),?){0,4}",
            dn in "[a-zA-Z=, ]{0,20}",
        ) {
            if let Ok(m) = PrincipalMapper::parse(&rules) {
                let _ = m.map(&dn);
            }
        }
    }
}
