# Installs switchyard @VERSION@ on Windows: fetches the x86_64 archive, checks it against
# SHA256SUMS and puts switchyard.exe in a directory of the user's (no administrator needed).
#
#   powershell -ExecutionPolicy Bypass -File install.ps1 [-From DIR_OR_URL] [-To DIR]
#
# -From  where the release's archives and SHA256SUMS are: a URL or a local directory
#        (or $env:SWITCHYARD_INSTALL_FROM; default: the address this script was made for, if any)
# -To    the directory to put switchyard.exe in (or $env:SWITCHYARD_INSTALL_DIR; default
#        %LOCALAPPDATA%\Programs\switchyard\bin)
param(
    [string]$From = $(if ($env:SWITCHYARD_INSTALL_FROM) { $env:SWITCHYARD_INSTALL_FROM } else { '@BASE_URL@' }),
    [string]$To = $(if ($env:SWITCHYARD_INSTALL_DIR) { $env:SWITCHYARD_INSTALL_DIR } else { Join-Path $env:LOCALAPPDATA 'Programs\switchyard\bin' })
)
$ErrorActionPreference = 'Stop'
$Version = '@VERSION@'

function Fail([string]$Message) {
    [Console]::Error.WriteLine("switchyard install: $Message")
    exit 1
}

if (-not $From) {
    Fail "this install script names no download address: give -From with the URL or directory that holds the release's archives and SHA256SUMS"
}
# Windows on Arm runs the x86_64 binary under emulation. A 32-bit PowerShell on 64-bit Windows
# says x86 here and names the machine's processor in PROCESSOR_ARCHITEW6432.
$arch = if ($env:PROCESSOR_ARCHITEW6432) { $env:PROCESSOR_ARCHITEW6432 } else { $env:PROCESSOR_ARCHITECTURE }
if ($arch -ne 'AMD64' -and $arch -ne 'ARM64') {
    Fail "no prebuilt switchyard for the $arch processor (there is for x86_64): build it from source with Rust"
}
$target = 'x86_64-pc-windows-gnu'
$name = "switchyard-$Version-$target"
$archive = "$name.zip"

$tmp = Join-Path ([IO.Path]::GetTempPath()) ("switchyard-install-" + [Guid]::NewGuid())
New-Item -ItemType Directory -Path $tmp | Out-Null
try {
    function Fetch([string]$File) {
        $dest = Join-Path $tmp $File
        if ($From -match '^https?://') {
            $url = $From.TrimEnd('/') + '/' + $File
            try {
                [Net.ServicePointManager]::SecurityProtocol = [Net.ServicePointManager]::SecurityProtocol -bor [Net.SecurityProtocolType]::Tls12
                # The progress bar makes Windows PowerShell 5.1 download many times slower.
                $ProgressPreference = 'SilentlyContinue'
                Invoke-WebRequest -UseBasicParsing -Uri $url -OutFile $dest
            } catch {
                Fail "cannot download ${url}: $($_.Exception.Message)"
            }
        } else {
            # A directory, or a file:// URL of one (file:///C:/rel is the directory C:/rel).
            $dir = $From
            if ($From -match '^file://') { $dir = ([Uri]$From).LocalPath }
            $src = Join-Path $dir $File
            if (-not (Test-Path -LiteralPath $src -PathType Leaf)) { Fail "$src cannot be read" }
            Copy-Item -LiteralPath $src -Destination $dest
        }
        return $dest
    }

    Write-Host "switchyard install: switchyard $Version for $target, from $From"
    $sums = Fetch 'SHA256SUMS'
    $zip = Fetch $archive
    $want = $null
    foreach ($line in Get-Content -LiteralPath $sums) {
        $parts = $line -split '\s+', 2
        if ($parts.Count -eq 2 -and ($parts[1] -eq $archive -or $parts[1] -eq "*$archive")) { $want = $parts[0].ToLower() }
    }
    if (-not $want) { Fail "SHA256SUMS has no line for ${archive}: the release is incomplete; nothing was installed" }
    $got = (Get-FileHash -Algorithm SHA256 -LiteralPath $zip).Hash.ToLower()
    if ($got -ne $want) {
        Fail "$archive does not match its checksum in SHA256SUMS (expected $want, got $got): the download is damaged or was tampered with; nothing was installed"
    }

    Expand-Archive -LiteralPath $zip -DestinationPath $tmp -Force
    $exe = Join-Path (Join-Path $tmp $name) 'switchyard.exe'
    if (-not (Test-Path -LiteralPath $exe -PathType Leaf)) { Fail "$archive holds no $name\switchyard.exe; nothing was installed" }
    New-Item -ItemType Directory -Force -Path $To | Out-Null
    $dest = Join-Path $To 'switchyard.exe'
    try {
        Copy-Item -LiteralPath $exe -Destination $dest -Force
    } catch {
        Fail "cannot write ${dest}: $($_.Exception.Message) (a running switchyard holds it: run ``switchyard stop`` and try again)"
    }
    Write-Host "switchyard install: installed $dest"
} finally {
    Remove-Item -Recurse -Force -LiteralPath $tmp -ErrorAction SilentlyContinue
}

$userPath = [Environment]::GetEnvironmentVariable('Path', 'User')
$onPath = @($env:Path -split ';') + @("$userPath" -split ';') | Where-Object { $_ -and ($_.TrimEnd('\') -ieq $To.TrimEnd('\')) }
if ($onPath) {
    Write-Host "switchyard install: $To is on PATH: run ``switchyard --help`` (in a new terminal)"
} else {
    Write-Host "switchyard install: $To is not on PATH. Add it for your user with"
    Write-Host "    [Environment]::SetEnvironmentVariable('Path', '$To;' + [Environment]::GetEnvironmentVariable('Path', 'User'), 'User')"
    Write-Host "and open a new terminal (or run switchyard as $dest)."
}
