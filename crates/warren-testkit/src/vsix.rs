//! VS Code extension packages (`.vsix`, a zip) made for tests: an editor installs one as it
//! installs a published extension.

/// A `.vsix` of extension `publisher.name` at `version`, holding only its manifests.
pub fn vsix(publisher: &str, name: &str, version: &str) -> Vec<u8> {
    let package = serde_json::json!({
        "name": name,
        "publisher": publisher,
        "version": version,
        "displayName": name,
        "engines": {"vscode": "^1.50.0"},
    })
    .to_string();
    let manifest = format!(
        r#"<?xml version="1.0" encoding="utf-8"?>
<PackageManifest Version="2.0.0" xmlns="http://schemas.microsoft.com/developer/vsx-schema/2011">
  <Metadata>
    <Identity Language="en-US" Id="{name}" Version="{version}" Publisher="{publisher}"/>
    <DisplayName>{name}</DisplayName>
    <Description xml:space="preserve">made for a test</Description>
    <Categories>Other</Categories>
  </Metadata>
  <Installation><InstallationTarget Id="Microsoft.VisualStudio.Code"/></Installation>
  <Dependencies/>
  <Assets>
    <Asset Type="Microsoft.VisualStudio.Code.Manifest" Path="extension/package.json" Addressable="true"/>
  </Assets>
</PackageManifest>
"#
    );
    let types = r#"<?xml version="1.0" encoding="utf-8"?>
<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension=".json" ContentType="application/json"/><Default Extension=".vsixmanifest" ContentType="text/xml"/></Types>
"#;
    stored_zip(&[
        ("[Content_Types].xml", types.as_bytes()),
        ("extension.vsixmanifest", manifest.as_bytes()),
        ("extension/package.json", package.as_bytes()),
    ])
}

/// A zip archive of `entries`, stored (not compressed): what the format needs and no more.
pub fn stored_zip(entries: &[(&str, &[u8])]) -> Vec<u8> {
    fn u16le(out: &mut Vec<u8>, v: usize) {
        out.extend_from_slice(&u16::try_from(v).expect("fits a zip field").to_le_bytes());
    }
    fn u32le(out: &mut Vec<u8>, v: usize) {
        out.extend_from_slice(&u32::try_from(v).expect("fits a zip field").to_le_bytes());
    }
    // 1980-01-01 00:00, the first date a zip can say.
    const DATE: usize = 0x21;
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in entries {
        let mut crc = flate2::Crc::new();
        crc.update(data);
        let crc = crc.sum() as usize;
        let offset = out.len();
        u32le(&mut out, 0x0403_4b50);
        for v in [20, 0, 0, 0, DATE] {
            u16le(&mut out, v);
        }
        for v in [crc, data.len(), data.len()] {
            u32le(&mut out, v);
        }
        u16le(&mut out, name.len());
        u16le(&mut out, 0);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);
        u32le(&mut central, 0x0201_4b50);
        for v in [20, 20, 0, 0, 0, DATE] {
            u16le(&mut central, v);
        }
        for v in [crc, data.len(), data.len()] {
            u32le(&mut central, v);
        }
        for v in [name.len(), 0, 0, 0, 0] {
            u16le(&mut central, v);
        }
        u32le(&mut central, 0);
        u32le(&mut central, offset);
        central.extend_from_slice(name.as_bytes());
    }
    let (at, size) = (out.len(), central.len());
    out.extend_from_slice(&central);
    u32le(&mut out, 0x0605_4b50);
    for v in [0, 0, entries.len(), entries.len()] {
        u16le(&mut out, v);
    }
    u32le(&mut out, size);
    u32le(&mut out, at);
    u16le(&mut out, 0);
    out
}
