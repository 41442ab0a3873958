//! Reading what the broker needs from a DER X.509 certificate: the subject distinguished
//! name, printed exactly as Java's `X500Principal.getName()` (RFC 2253 form) prints it,
//! because Kafka's principal mapping rules and ACLs are written against that text; and
//! the validity period.
//!
//! Java's printing, which this follows (OpenJDK `sun.security.x509.AVA.toRFC2253String`):
//! - RDNs in reverse certificate order (most specific first), joined by ','; the AVAs of a
//!   multi-valued RDN in encoded order, joined by '+'.
//! - Keywords only for RFC 2253's attributes (CN, C, L, ST, O, OU, STREET, DC, UID); any
//!   other attribute is its dotted OID, and its value `#` + the lowercase hex of the
//!   value's DER encoding. So is a value that is not one of the string types Java reads.
//! - In string values, each of `, = + < > # ; " \` is escaped with '\', NUL becomes `\00`,
//!   and leading and trailing spaces (and CRs) get a '\'. Java escapes '=' and every '#'
//!   (not only a leading one), beyond RFC 2253's minimum; so does this.

use x509_parser::der_parser::asn1_rs::{Any, Class, Tag};
use x509_parser::x509::{AttributeTypeAndValue, X509Name};

use crate::error::CertError;

/// The certificate's subject, e.g. `CN=alice,OU=payments,O=Bank,C=DE`.
pub fn subject_dn(cert_der: &[u8]) -> Result<String, CertError> {
    with_certificate(cert_der, |cert| rfc2253_name(cert.subject()))
}

/// `(not_before, not_after)` in seconds since the Unix epoch, to refuse an expired or
/// not-yet-valid certificate at broker start. The caller compares with its clock.
pub fn validity(cert_der: &[u8]) -> Result<(i64, i64), CertError> {
    with_certificate(cert_der, |cert| {
        let validity = cert.validity();
        (
            validity.not_before.timestamp(),
            validity.not_after.timestamp(),
        )
    })
}

fn with_certificate<T>(
    cert_der: &[u8],
    read: impl FnOnce(&x509_parser::certificate::X509Certificate<'_>) -> T,
) -> Result<T, CertError> {
    let (rest, cert) = x509_parser::parse_x509_certificate(cert_der)
        .map_err(|e| CertError::Malformed(e.to_string()))?;
    if !rest.is_empty() {
        return Err(CertError::TrailingBytes(rest.len()));
    }
    Ok(read(&cert))
}

/// RFC 2253 text of a name, as `X500Principal.getName()`.
fn rfc2253_name(name: &X509Name<'_>) -> String {
    let rdns: Vec<String> = name
        .iter()
        .map(|rdn| {
            rdn.iter()
                .map(rfc2253_attribute)
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    rdns.into_iter().rev().collect::<Vec<_>>().join(",")
}

fn rfc2253_attribute(attribute: &AttributeTypeAndValue<'_>) -> String {
    let oid = attribute.attr_type().to_id_string();
    let value = attribute.attr_value();
    match keyword(&oid) {
        Some(keyword) if is_java_string(value) => {
            format!(
                "{keyword}={}",
                escape_value(&String::from_utf8_lossy(value.data))
            )
        }
        Some(keyword) => format!("{keyword}=#{}", der_hex(value)),
        None => format!("{oid}=#{}", der_hex(value)),
    }
}

/// The keywords `X500Principal.getName()` uses; every other type prints as its OID.
fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.1" => "UID",
        "0.9.2342.19200300.100.1.25" => "DC",
        _ => return None,
    })
}

/// The universal string types Java prints as text. NumericString, VisibleString and
/// UniversalString are not among them: Java prints those as hex, and so does this.
fn is_java_string(value: &Any<'_>) -> bool {
    value.header.class() == Class::Universal
        && !value.header.is_constructed()
        && matches!(
            value.tag(),
            Tag::PrintableString
                | Tag::TeletexString
                | Tag::Ia5String
                | Tag::GeneralString
                | Tag::BmpString
                | Tag::Utf8String
        )
}

/// Escapes a value as Java does. Java decodes every string type's bytes as UTF-8 (even
/// BMPString's UTF-16), which the caller mirrors with a lossy decode.
fn escape_value(value: &str) -> String {
    let mut escaped: Vec<char> = Vec::with_capacity(value.len());
    for c in value.chars() {
        match c {
            ',' | '=' | '+' | '<' | '>' | '#' | ';' | '"' | '\\' => {
                escaped.push('\\');
                escaped.push(c);
            }
            '\0' => escaped.extend(['\\', '0', '0']),
            _ => escaped.push(c),
        }
    }
    let is_space = |c: &char| *c == ' ' || *c == '\r';
    let lead = escaped.iter().take_while(|c| is_space(c)).count();
    let trail = escaped.iter().rev().take_while(|c| is_space(c)).count();
    let body_end = escaped.len().saturating_sub(trail).max(lead);
    let mut out = String::with_capacity(escaped.len() + lead + trail);
    for (i, c) in escaped.into_iter().enumerate() {
        if i < lead || i >= body_end {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Lowercase hex of the value's DER encoding (identifier, length, contents), as Java's
/// `DerValue.toByteArray()` re-encodes it.
fn der_hex(value: &Any<'_>) -> String {
    let mut der = Vec::with_capacity(value.data.len() + 6);
    let class_bits = (value.header.class() as u8) << 6;
    let constructed_bit = if value.header.is_constructed() {
        0x20
    } else {
        0
    };
    let tag = value.tag().0;
    if tag < 31 {
        // Lossless: the tag is below 31.
        der.push(class_bits | constructed_bit | tag as u8);
    } else {
        der.push(class_bits | constructed_bit | 0x1f);
        der.extend(base128(tag));
    }
    let len = value.data.len();
    if len < 0x80 {
        der.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let significant = &bytes[bytes.iter().take_while(|b| **b == 0).count()..];
        der.push(0x80 | significant.len() as u8);
        der.extend_from_slice(significant);
    }
    der.extend_from_slice(value.data);
    der.iter().map(|b| format!("{b:02x}")).collect()
}

/// A high tag number in base 128, most significant group first, high bit on all but last.
fn base128(mut n: u32) -> Vec<u8> {
    let mut groups = vec![(n & 0x7f) as u8];
    n >>= 7;
    while n > 0 {
        groups.push(0x80 | (n & 0x7f) as u8);
        n >>= 7;
    }
    groups.reverse();
    groups
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;
    use rcgen::{CertificateParams, DistinguishedName, DnType, DnValue, KeyPair};
    use x509_parser::prelude::FromDer;

    use super::*;

    fn self_signed(dn: DistinguishedName) -> Vec<u8> {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = dn;
        params.not_before = rcgen::date_time_ymd(2024, 1, 2);
        params.not_after = rcgen::date_time_ymd(2034, 1, 2);
        let key = KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    fn alice() -> DistinguishedName {
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CountryName, "DE");
        dn.push(DnType::OrganizationName, "Bank");
        dn.push(DnType::OrganizationalUnitName, "payments");
        dn.push(DnType::CommonName, "alice");
        dn
    }

    #[test]
    fn subject_is_most_specific_first() {
        let der = self_signed(alice());
        assert_eq!(
            subject_dn(&der).unwrap(),
            "CN=alice,OU=payments,O=Bank,C=DE"
        );
    }

    #[test]
    fn validity_is_unix_seconds() {
        let der = self_signed(alice());
        // 2024-01-02T00:00:00Z and 2034-01-02T00:00:00Z.
        assert_eq!(validity(&der).unwrap(), (1_704_153_600, 2_019_772_800));
    }

    #[test]
    fn special_characters_are_escaped_as_java_does() {
        let mut dn = DistinguishedName::new();
        dn.push(DnType::OrganizationName, "Smith, Jones + Co <\"x\">;\\");
        dn.push(DnType::CommonName, " #lead=trail# ");
        let der = self_signed(dn);
        assert_eq!(
            subject_dn(&der).unwrap(),
            r#"CN=\ \#lead\=trail\#\ ,O=Smith\, Jones \+ Co \<\"x\"\>\;\\"#
        );
    }

    #[test]
    fn printable_and_ia5_strings_read_as_text() {
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            DnValue::PrintableString("alice".try_into().unwrap()),
        );
        dn.push(
            DnType::CustomDnType(vec![0, 9, 2342, 19_200_300, 100, 1, 25]),
            DnValue::Ia5String("example".try_into().unwrap()),
        );
        dn.push(
            DnType::CustomDnType(vec![0, 9, 2342, 19_200_300, 100, 1, 1]),
            "u1",
        );
        dn.push(DnType::CustomDnType(vec![2, 5, 4, 9]), "Main St 1");
        dn.push(DnType::LocalityName, "Köln");
        dn.push(DnType::StateOrProvinceName, "NRW");
        let der = self_signed(dn);
        assert_eq!(
            subject_dn(&der).unwrap(),
            "ST=NRW,L=Köln,STREET=Main St 1,UID=u1,DC=example,CN=alice"
        );
    }

    #[test]
    fn other_attributes_are_oids_with_hex_values() {
        // emailAddress is not an RFC 2253 keyword: Java prints
        // 1.2.840.113549.1.9.1=#16 0d "a@example.com".
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CustomDnType(vec![1, 2, 840, 113_549, 1, 9, 1]),
            DnValue::Ia5String("a@example.com".try_into().unwrap()),
        );
        dn.push(DnType::CommonName, "alice");
        let der = self_signed(dn);
        assert_eq!(
            subject_dn(&der).unwrap(),
            "CN=alice,1.2.840.113549.1.9.1=#160d61406578616d706c652e636f6d"
        );
    }

    /// (OID contents, value tag, value contents) of one attribute.
    type Ava<'a> = (&'a [u8], u8, &'a [u8]);

    /// A Name built by hand, for what rcgen cannot make: multi-valued RDNs, odd tags.
    fn name_der(rdns: &[&[Ava<'_>]]) -> Vec<u8> {
        fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
            assert!(content.len() < 0x80);
            let mut v = vec![tag, content.len() as u8];
            v.extend_from_slice(content);
            v
        }
        let mut seq = Vec::new();
        for rdn in rdns {
            let mut set = Vec::new();
            for (oid, tag, value) in *rdn {
                let mut ava = tlv(0x06, oid);
                ava.extend(tlv(*tag, value));
                set.extend(tlv(0x30, &ava));
            }
            seq.extend(tlv(0x31, &set));
        }
        tlv(0x30, &seq)
    }

    const CN: &[u8] = &[0x55, 0x04, 0x03];
    const OU: &[u8] = &[0x55, 0x04, 0x0b];
    const SERIAL_NUMBER: &[u8] = &[0x55, 0x04, 0x05];

    fn format(der: &[u8]) -> String {
        let (rest, name) = X509Name::from_der(der).unwrap();
        assert!(rest.is_empty());
        rfc2253_name(&name)
    }

    #[test]
    fn multi_valued_rdns_join_with_plus_in_encoded_order() {
        let der = name_der(&[
            &[(OU, 0x0c, b"ops"), (CN, 0x0c, b"bob")],
            &[(CN, 0x13, b"x")],
        ]);
        assert_eq!(format(&der), "CN=x,OU=ops+CN=bob");
    }

    #[test]
    fn non_java_string_types_print_as_hex() {
        // NumericString (0x12) for CN and a PrintableString serialNumber (not a keyword).
        let der = name_der(&[&[(CN, 0x12, b"123")], &[(SERIAL_NUMBER, 0x13, b"42")]]);
        assert_eq!(format(&der), "2.5.4.5=#13023432,CN=#1203313233");
    }

    #[test]
    fn nul_and_whitespace_edges() {
        let der = name_der(&[
            &[(CN, 0x0c, b"a\0b")],
            &[(CN, 0x0c, b"  ")],
            &[(CN, 0x0c, b"")],
        ]);
        assert_eq!(format(&der), "CN=,CN=\\ \\ ,CN=a\\00b");
    }

    #[test]
    fn empty_subject_is_empty_text() {
        assert_eq!(format(&name_der(&[])), "");
    }

    #[test]
    fn long_values_and_high_tags_encode_like_der() {
        assert_eq!(base128(31), vec![31]);
        assert_eq!(base128(201), vec![0x81, 0x49]);
        let value = vec![b'a'; 200];
        let escaped = escape_value(&String::from_utf8(value).unwrap());
        assert_eq!(escaped.len(), 200);
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(matches!(subject_dn(b""), Err(CertError::Malformed(_))));
        assert!(matches!(
            subject_dn(b"\x30\x03abc"),
            Err(CertError::Malformed(_))
        ));
        let mut der = self_signed(alice());
        der.push(0);
        assert_eq!(subject_dn(&der), Err(CertError::TrailingBytes(1)));
        assert_eq!(validity(&der), Err(CertError::TrailingBytes(1)));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = subject_dn(&bytes);
            let _ = validity(&bytes);
        }

        #[test]
        fn escaped_values_have_no_bare_separators(value in ".{0,40}") {
            let escaped = escape_value(&value);
            let mut chars = escaped.chars();
            while let Some(c) = chars.next() {
                if c == '\\' {
                    prop_assert!(chars.next().is_some());
                } else {
                    prop_assert!(!",+;\"<>=#".contains(c));
                }
            }
        }
    }
}
