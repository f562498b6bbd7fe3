//! TLS for HTTPS checks (M16): host names and chains are not verified
//! (backends commonly serve self-signed or internal-CA certificates under
//! names that are not their addresses), but the leaf certificate's validity
//! period is: an expired or not-yet-valid certificate fails the probe. The
//! handshake signatures are verified with the ring provider's algorithms, so
//! the peer must hold the certificate's private key.

// The I/O part of the crate (feature `probers`): clippy.toml keeps sockets,
// clocks and threads out of the decisions, not out of here.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, SignatureScheme};

/// Checks that `der` parses as an X.509 certificate valid at `now_secs`
/// (seconds since the Unix epoch, boundaries inclusive).
pub fn check_validity(der: &[u8], now_secs: u64) -> Result<(), CertificateError> {
    let (_, cert) =
        x509_parser::parse_x509_certificate(der).map_err(|_| CertificateError::BadEncoding)?;
    let validity = cert.validity();
    let now = i64::try_from(now_secs).unwrap_or(i64::MAX);
    if now < validity.not_before.timestamp() {
        Err(CertificateError::NotValidYet)
    } else if now > validity.not_after.timestamp() {
        Err(CertificateError::Expired)
    } else {
        Ok(())
    }
}

/// Accepts any certificate that is within its validity period.
#[derive(Debug)]
struct ValidityOnly {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for ValidityOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        check_validity(end_entity.as_ref(), now.as_secs())?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// The client configuration of HTTPS probes: ring provider, TLS 1.2 and
/// 1.3, validity-period-only certificate verification, no client certificate, no ALPN
/// (HTTP/1.1).
pub fn client_config() -> Result<Arc<ClientConfig>, rustls::Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(ValidityOnly {
        algorithms: provider.signature_verification_algorithms,
    });
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The name sent as SNI: the configured host (without a port) if it is a
/// DNS name or an IP literal, else the endpoint address (no SNI is sent for
/// addresses).
pub fn server_name(host: Option<&str>, addr: std::net::IpAddr) -> ServerName<'static> {
    let from_host = host.and_then(|h| {
        let bare = match h.strip_prefix('[') {
            Some(rest) => rest.split_once(']').map_or(rest, |(a, _)| a),
            None => h.rsplit_once(':').map_or(h, |(a, _)| a),
        };
        ServerName::try_from(bare.to_owned()).ok()
    });
    from_host.unwrap_or_else(|| ServerName::IpAddress(addr.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    #[test]
    fn garbage_is_bad_encoding() {
        assert_eq!(
            check_validity(b"not a certificate", 0),
            Err(CertificateError::BadEncoding)
        );
        assert_eq!(check_validity(&[], 0), Err(CertificateError::BadEncoding));
    }

    #[test]
    fn validity_period_boundaries() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["x.invalid".to_owned()]).unwrap();
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        let cert = params.self_signed(&key).unwrap();
        let der = cert.der().as_ref();
        let (start, end) = (946_684_800, 978_307_200); // 2000-01-01, 2001-01-01
        assert_eq!(
            check_validity(der, start - 1),
            Err(CertificateError::NotValidYet)
        );
        assert_eq!(check_validity(der, start), Ok(()));
        assert_eq!(check_validity(der, end), Ok(()));
        assert_eq!(check_validity(der, end + 1), Err(CertificateError::Expired));
        assert_eq!(
            check_validity(der, u64::MAX),
            Err(CertificateError::Expired)
        );
    }

    #[test]
    fn server_name_prefers_the_configured_host() {
        let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        assert_eq!(
            server_name(Some("web.example:8443"), a),
            ServerName::try_from("web.example").unwrap().to_owned()
        );
        assert_eq!(
            server_name(Some("web.example"), a),
            ServerName::try_from("web.example").unwrap().to_owned()
        );
        assert_eq!(server_name(None, a), ServerName::IpAddress(a.into()));
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        assert_eq!(
            server_name(Some("[::1]:443"), a),
            ServerName::IpAddress(v6.into())
        );
        // Not a name: fall back to the address.
        assert_eq!(
            server_name(Some("bad_name!"), a),
            ServerName::IpAddress(a.into())
        );
    }
}
