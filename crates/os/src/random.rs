//! Random bytes from the OS (getrandom on Linux, getentropy on macOS, ProcessPrng on Windows,
//! all through the `getrandom` crate), for tokens, session ids and keys.

/// `N` bytes from the OS's random source.
pub fn random<const N: usize>() -> std::io::Result<[u8; N]> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(format!("no random bytes from the OS: {e}")))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn two_draws_differ_and_fill_every_byte() {
        let (a, b) = (super::random::<32>().unwrap(), super::random::<32>().unwrap());
        assert_ne!(a, b);
        // 32 zero bytes from a working source: about 2^-256.
        assert!(a.iter().any(|x| *x != 0));
    }
}
