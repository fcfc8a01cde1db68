"""Reading a dataset's images: paths relative to the dataset file, or base64 (standard or
URL-safe, padded or not, bare or as ``data:image/...;base64,`` URLs), decoded to RGB for the
model (turned upright as their EXIF orientation says, transparent parts on white, 16-bit grey
scaled to 8 bits, as an image viewer shows them), or checked at load as ``data.image_check``
says.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Literal

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

if TYPE_CHECKING:
    from rlcs.data import Item


def decode_image(ref: str, base_dir: Path) -> Image.Image:
    """Open an image given as a path relative to ``base_dir`` or as base64; raises ValueError.

    ``data:image/...;base64,`` URLs are base64. A plain string is a path if such a file exists,
    and otherwise is tried as bare base64. Base64 is standard or URL-safe, padded or not.

    The image comes back as it is displayed: a photo whose EXIF orientation says it was taken
    sideways is turned upright, and transparent pixels are laid on white rather than losing
    their alpha (a transparent PNG's background is often stored black, as its text may be).
    16- and 32-bit grey images (a 16-bit PNG's) are scaled to 8 bits (``_grey_to_8_bits``)
    rather than clipped at 255, which turns nearly all of such an image white. A model served
    later reads image files the same way, so training sees what it will see.
    """
    source = _image_source(ref, base_dir)
    if isinstance(source, Path):
        try:
            source = source.read_bytes()
        except OSError as e:
            raise ValueError(f"cannot read {source}: {e.strerror}") from None
    return _to_rgb(_open_image(io.BytesIO(source), len(source), load=True))


_ORIENTATION = 0x0112  # the EXIF tag; 1 is upright


def _to_rgb(img: Image.Image) -> Image.Image:
    """``img`` upright (its EXIF orientation applied) and in RGB, transparency on white."""
    try:
        if img.getexif().get(_ORIENTATION, 1) != 1:
            img = ImageOps.exif_transpose(img)
    except Exception:  # a damaged EXIF block: keep the pixels as stored
        pass
    if img.mode in _WIDE_GREY:
        img = _grey_to_8_bits(img)
    if img.mode in ("RGBA", "LA", "PA") or "transparency" in img.info:
        rgba = img.convert("RGBA")
        flat = Image.new("RGB", rgba.size, (255, 255, 255))
        flat.paste(rgba, mask=rgba.getchannel("A"))
        return flat
    return img.convert("RGB")


#: Grey modes of more than 8 bits, which PIL's own conversion to RGB clips at 255
_WIDE_GREY = ("I;16", "I;16B", "I;16L", "I;16N", "I")


def _grey_to_8_bits(img: Image.Image) -> Image.Image:
    """A 16- or 32-bit grey image as 8-bit grey ("L"; "LA" where a grey value is marked
    transparent, as a PNG's tRNS does).

    16-bit values keep their high byte (0..65535 -> 0..255, ``>> 8``). Mode ``I`` (32-bit
    integers) is read the same way while its values lie in 0..65535: that is what it holds
    when it comes from a 16-bit file (Pillow gives some, such as 16-bit PNGs in older versions,
    as ``I``). Values beyond that range have no white to scale to: the image is stretched from
    its own minimum (0) to its maximum (255), and one flat value comes out 0."""
    values = np.asarray(img).astype(np.int64)
    lo, hi = (int(values.min()), int(values.max())) if values.size else (0, 0)
    if img.mode != "I" or (lo >= 0 and hi <= 0xFFFF):
        grey = values >> 8
    else:
        grey = (values - lo) * 255 // max(hi - lo, 1)
    out = Image.fromarray(grey.astype(np.uint8))
    key = img.info.get("transparency")
    if isinstance(key, int):
        alpha = np.where(values == key, 0, 255).astype(np.uint8)
        return Image.merge("LA", (out, Image.fromarray(alpha)))
    return out


#: how ``check_image`` checks an image at load: its pixels, its header only, or not at all
ImageCheck = Literal["decode", "header", "off"]
IMAGE_CHECKS: tuple[str, ...] = ("decode", "header", "off")


def check_image(ref: str, base_dir: Path, how: ImageCheck = "decode") -> None:
    """Check that an image opens, as ``decode_image`` would; raises ValueError. ``decode``
    reads its pixels, as training will; ``header`` only its format and size (PIL's lazy open:
    a missing file, a file that is no image and bad base64 are caught, a file cut short in
    its pixel data is not), many times faster; ``off`` checks nothing."""
    if how == "off":
        return
    if how == "decode":
        decode_image(ref, base_dir)
        return
    source = _image_source(ref, base_dir)
    if not isinstance(source, Path):
        _open_image(io.BytesIO(source), len(source), load=False)
        return
    try:
        f = source.open("rb")
        size = os.fstat(f.fileno()).st_size
    except OSError as e:
        raise ValueError(f"cannot read {source}: {e.strerror}") from None
    with f:
        _open_image(f, size, load=False)


def _image_source(ref: str, base_dir: Path) -> Path | bytes:
    """The file an image reference names, or the bytes its base64 holds; ValueError if
    neither."""
    if ref.startswith("data:"):
        return _b64(ref.partition(",")[2])
    if not ref.strip():
        raise ValueError("an empty image reference (expected a path or base64)")
    if _URL_RE.match(ref):
        raise ValueError("a URL; give a path relative to the dataset file, or base64")
    path = Path(ref) if Path(ref).is_absolute() else base_dir / ref
    if file_exists(path):
        return path
    if len(ref) >= 64 and _B64_RE.fullmatch(ref):
        try:
            return _b64(ref)
        except _Base64Error as e:  # a long name with no dot, or base64 gone wrong
            raise ValueError(f"image not found: {path} (nor is it base64: {e.reason})") from None
    if _is_dir(path):
        raise ValueError(f"a directory, not an image: {path}")
    raise ValueError(f"image not found: {path}")


def _open_image(fp: BinaryIO, size: int, load: bool) -> Image.Image:
    """PIL's image of ``fp`` (``size`` bytes), its pixels read when ``load``; ValueError if
    it is no image or a damaged one."""
    try:
        img = Image.open(fp)
        if load:
            img.load()
    except UnidentifiedImageError:  # PIL's message names only its in-memory buffer
        raise ValueError(f"unreadable image (not an image format PIL can open; {size} "
                         "bytes)") from None  # fmt: skip
    except (OSError, Image.DecompressionBombError) as e:  # over 179 million pixels: a bomb
        raise ValueError(f"unreadable image ({e.__class__.__name__}: {e})") from None
    return img


def file_exists(path: Path) -> bool:
    """``path.is_file()``, and False where the OS refuses the name: bare base64 with no '/' is
    one file name, and one over 255 bytes raises instead of being no file."""
    try:
        return path.is_file()
    except OSError:
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:
        return False


_B64_RE = re.compile(r"[A-Za-z0-9+/_\-\s]+=*\s*")
_URL_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def inline_images(item: Item, base_dir: Path = Path("/")) -> Item:
    """The item with each image that is a file (a path, relative to ``base_dir``) replaced by
    its bytes as a ``data:`` URL, unchanged; base64 images stay as they are. The bytes are
    not decoded nor re-encoded. Raises ValueError naming the item when a file cannot be read."""
    refs = []
    for ref in item.images:
        path = Path(ref) if Path(ref).is_absolute() else base_dir / ref
        if ref.startswith("data:") or not file_exists(path):
            refs.append(ref)  # base64 already, or not a file: decode_image will say which
            continue
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise ValueError(f"item {item.id!r}: cannot read image {path}: {e.strerror}") from None
        mime = _MIME.get(path.suffix.lower(), "application/octet-stream")
        refs.append(f"data:{mime};base64,{base64.b64encode(raw).decode('ascii')}")
    return item.model_copy(update={"images": refs}) if item.images else item


_MIME = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp",
         ".gif": "image/gif", ".bmp": "image/bmp", ".tif": "image/tiff", ".tiff": "image/tiff"}  # fmt: skip


def _b64(text: str) -> bytes:
    """Decode base64 text, standard or URL-safe ('-' and '_' for '+' and '/'), padded or not;
    line breaks and spaces (base64 wrapped at 76 columns) are allowed."""
    compact = "".join(text.split())
    if "-" in compact or "_" in compact:
        if "+" in compact or "/" in compact:
            raise _Base64Error("it mixes the standard alphabet ('+', '/') and the URL-safe one "
                               "('-', '_')")  # fmt: skip
        compact = compact.translate(_URL_SAFE)
    if not compact.endswith("="):
        compact += "=" * (-len(compact) % 4)
    try:
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError) as e:
        raise _Base64Error(str(e)) from None


_URL_SAFE = str.maketrans("-_", "+/")


class _Base64Error(ValueError):
    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"invalid base64 image: {reason}")
