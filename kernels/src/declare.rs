/// Declares a kernel: a `pub static` [`switchyard_core::KernelSig`] named
/// `$name`, submitted to the registry. The symbol is written once, here.
macro_rules! declare_kernel {
    ($(#[$doc:meta])* $name:ident = $module:literal :: $symbol:literal ( $($arg:expr),* $(,)? )) => {
        $(#[$doc])*
        pub static $name: switchyard_core::KernelSig = switchyard_core::KernelSig {
            module: $module,
            symbol: $symbol,
            args: &[$($arg),*],
        };
        inventory::submit! { switchyard_core::registry::Declared(&$name) }
    };
    ($(#[$doc:meta])* $name:ident = $module:literal :: $symbol:literal => $args:expr) => {
        $(#[$doc])*
        pub static $name: switchyard_core::KernelSig = switchyard_core::KernelSig {
            module: $module,
            symbol: $symbol,
            args: $args,
        };
        inventory::submit! { switchyard_core::registry::Declared(&$name) }
    };
}
